"""Working memory: completed tasks and blockers (``tasks.WorkingMemory``), their records (``task_models``),
the window an agent receives (``task_window``), report summaries (``task_report``) and legacy state files
(``task_state``)."""
