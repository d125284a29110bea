"""One router per resource: completions, health, admin, metrics."""
