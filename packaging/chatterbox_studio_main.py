"""Entry point of the frozen app: the same main() as the `chatterbox-studio` console script.

No arguments opens the desktop window; a subcommand runs the command line
(`chatterbox-studio selftest MODEL.gguf -o out.wav` checks the build).
"""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
