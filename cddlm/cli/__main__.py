import sys

from cddlm.cli import main

sys.exit(main())
