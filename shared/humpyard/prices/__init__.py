"""``humpyard prices``: endpoint prices, context windows and capabilities from a
models.dev-format catalogue (docs/routing.md, "Keeping prices current").

``catalog.py`` reads a catalogue (a file or a URL) and finds a configured
provider in it; ``compare.py`` sets the configured endpoints next to it;
``commands.py`` is what ``humpyard prices import`` and ``prices check`` run.
Nothing here is on the request path.
"""

MODELS_DEV_URL = "https://models.dev/api.json"
