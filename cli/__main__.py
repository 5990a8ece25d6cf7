"""``python -m leantfx.cli``: the same as the ``leantfx`` console script."""
import sys

from leantfx.cli import main

if __name__ == '__main__':
  sys.exit(main.main())
