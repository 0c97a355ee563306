"""``python -m mutransfer_cli``: the same CLI as ``mutransfer``."""

from mutransfer_cli import main

raise SystemExit(main())
