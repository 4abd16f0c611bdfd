"""The `tan-tune` command line: the top of the pipeline.

`main.py` registers one module per subcommand (`privacy`, `train`, `search`,
`promote`, `ledger`); `args.py` holds the argparse pieces they share. This is
the only stage that parses arguments; it may import every stage below it, and
nothing outside `cli/` imports it (the entry points are `main.main` and
`python -m tan_tune.cli`).
"""
