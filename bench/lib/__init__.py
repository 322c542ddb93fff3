"""The library under bench/scheduler.py: cluster set-up, load, CPU accounting, metrics, tables and run files.
bench/scheduler.py is the command; bench/operator_events.py borrows from here too."""
