"""``python -m mutransfer``: the CLI's entry shim. The library itself never imports the CLI
(``mutransfer_cli`` sits on top of mutransfer, sweeps and analysis); this module is only run,
never imported by the library, and the import-contract test allows exactly this one file."""

from mutransfer_cli import main

raise SystemExit(main())
