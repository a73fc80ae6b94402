"""Qt-free pieces of the app: audio playback, takes and export, Voice Lab operations."""
