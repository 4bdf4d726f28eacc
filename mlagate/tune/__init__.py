"""`mlagate tune`: search a config family's space per shape (run), pick and check (rules), write the table (report)."""
