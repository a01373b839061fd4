//! The session worker: turn loop, tools and memory. It runs inside the sandbox, one process per session, and is
//! started by the supervisor through the hidden `service-rs worker` subcommand.
