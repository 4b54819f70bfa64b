from torchpact.cli import main

raise SystemExit(main())
