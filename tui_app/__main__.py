from tui_app.cli import main

raise SystemExit(main())
