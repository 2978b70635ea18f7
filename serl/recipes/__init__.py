"""The recipes: each in its own package ``serl/recipes/NAME/`` (``config.py``, ``recipe.py``),
named in the registry (``serl.config.registry``); ``base.py`` is the interface they implement."""
