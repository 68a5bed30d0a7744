from queen_raft.cli import main

raise SystemExit(main())
