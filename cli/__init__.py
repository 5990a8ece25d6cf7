"""The front end: every ``leantfx`` subcommand, its options and their checks.

The top layer: it may import every other package; nothing imports it.
``main`` assembles the parser from the command modules (run, compile/kfp,
watch, serving, tools), ``options`` is the one pipeline option set,
``argtypes`` the argument types, ``dataset`` the data resolution and
``build`` the one PipelineConfig builder all runners use.
"""
