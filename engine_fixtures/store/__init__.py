"""What is kept on disk: the results format every tier shares, machine-keyed baseline files, run metadata."""
