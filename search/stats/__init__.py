"""Small statistics: Pareto fronts, parameter importances, the signed-rank test."""
