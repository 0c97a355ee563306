"""``python -m sweeps``: a spawned sweep worker (:func:`sweeps.worker.main`)."""

from sweeps.worker import main

raise SystemExit(main())
