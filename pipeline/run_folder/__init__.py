"""The run folder on disk and the jobs on it: file names, atomic JSON, job declarations and states, owners,
the runs list and what the live view reads; the data directory; ending a job's processes. Imports nothing else of
pipeline/."""
