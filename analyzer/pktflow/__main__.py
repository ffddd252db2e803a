import sys

from pktflow.cli import main

sys.exit(main())
