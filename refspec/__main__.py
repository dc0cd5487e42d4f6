"""``python -m refspec``: the same command line as the ``refspec`` console script."""

from refspec.cli import main

if __name__ == "__main__":   # not when a spawned worker process imports this module
    main()
