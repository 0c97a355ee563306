"""Is a parametrization right: the coordinate check and the audit of someone else's μP."""
