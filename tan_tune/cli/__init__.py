"""The `tan-tune` command line: the top of the pipeline.

`main.py` registers one module per subcommand (`privacy`, `train`, `search`,
`promote`, `ledger`, `audit`, `registry`); `args.py` holds the argparse
pieces they share, and `privacy_tables.py` the calculator's printing. This
is the only stage that parses arguments. It is a thin layer over the Python
API: it imports nothing of the package but `tan_tune.api` (the functions it
calls, the errors it reports, the spellings its options offer, the files
and links it prints), `console` and `errors`; and nothing outside `cli/`
imports it (the entry points are `main.main` and `python -m tan_tune.cli`).
"""
