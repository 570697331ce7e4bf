"""Spark jobs of the warehouse loads: the ``logbus`` data source and the load → count → reconcile cycle."""
