"""The PySide6 desktop application: the only part of the project that imports Qt."""
