"""A team's own tabular data and model, as tan_tune finds them by reference."""
