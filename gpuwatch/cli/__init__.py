"""The command line: ``gpuwatch`` and its subcommands (main.py), the report commands
(report.py, diff.py), and how a script's own arguments are told from ours (target_args.py)."""
