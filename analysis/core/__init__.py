"""Loading, cells, statistics, paired comparisons, multiplicity, plotting and style."""
