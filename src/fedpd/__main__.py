import sys

from fedpd.cli import main

sys.exit(main())
