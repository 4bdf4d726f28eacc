"""`mlagate bisect`: find the commit where a case drifted on main (run: the history walk; rules: the search)."""
