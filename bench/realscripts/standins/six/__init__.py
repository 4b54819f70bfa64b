"""Stand-in for six: only ``six.moves.urllib``, which serves prepared files as the requests stand-in does."""
