"""SGLang serving performance regression suite: library and pytest plugin.

The plugin (``engine_fixtures.plugin``) only wires hooks; everything else lives in one small
module per concern (see docs/ARCHITECTURE.md).
"""

__version__ = "0.1.0"
