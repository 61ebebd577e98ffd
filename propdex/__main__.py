import sys

from propdex.cli import main

sys.exit(main())
