from benchmarks.gpu_check.run import main

raise SystemExit(main())
