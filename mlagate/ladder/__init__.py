"""`mlagate ladder`: inject known slowdowns and gate them, to qualify a runner (run, rules, report)."""
