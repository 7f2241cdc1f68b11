"""One module per subcommand: each turns its options into a run of the engine, a server's client,
a recording or a page, and says in one line what went wrong."""
