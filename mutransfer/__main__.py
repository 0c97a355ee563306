from mutransfer.cli import main

raise SystemExit(main())
