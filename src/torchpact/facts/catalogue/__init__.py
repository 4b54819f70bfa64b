"""The catalogue: ``<area>/<id>.py``, one experiment per claim (see :mod:`torchpact.facts`)."""
