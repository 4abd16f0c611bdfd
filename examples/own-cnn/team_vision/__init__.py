"""A team's own vision code: the model tan_tune searches by reference."""
