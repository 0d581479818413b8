"""The reconciler: every business day, proves that the PSP, our books and MT5 agree, or opens a case."""
