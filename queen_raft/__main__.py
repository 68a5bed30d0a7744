from queen_raft.cli.main import main

raise SystemExit(main())
