"""mechbench package."""
