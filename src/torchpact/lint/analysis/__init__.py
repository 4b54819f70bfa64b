"""The analyses behind ``FileContext`` (lint/context.py), one job each.

Each is built from the parsed file and the analyses it needs, never from the context itself, so
they hold no reference back to it (lint runs with the cyclic garbage collector off) and each can be
built and tested alone: navigation (parents, scopes, branches), imports (what a name resolves to),
definitions (this file's functions and classes), bindings (where a name is bound), value kinds
(what a value holds and how surely), grad mode, rank guards, project facts and the CPU budget;
following bounds every recursion through definitions (``@follows_definitions``).
"""
