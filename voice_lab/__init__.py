"""Voice Lab: decode, probe, find speech, pick a window and clean a recording for cloning.

Pure Python (numpy + ffmpeg); never imports Qt.
"""
