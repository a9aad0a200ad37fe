"""Stage 2, plan: build options -> a `Plan` (`stage.plan`): which variants, each one's
configurations (`tuning`, `builds`) and cache key. Nothing is written."""
