"""From records to the paper: the summary, the paper registry, statistics, tables, figures, preconditions and the claims table."""
