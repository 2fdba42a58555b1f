"""The run service: every front end creates, resumes, executes and reads runs through it."""
