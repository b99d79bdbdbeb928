"""The reports: the paper grid's, the lag sweeps', the random-reward section, the token viewer's data."""
