"""One router per resource: completions, signals, health, admin (reload, client keys), metrics."""
