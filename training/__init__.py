"""Training loops: plain SGD (``train``); later ADMM Tucker, pruning, SCC."""
