import sys

from mlagate.cli import main

sys.exit(main())
