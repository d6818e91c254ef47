from tensorconv.cli import main

raise SystemExit(main())
