//! RDMA netlink (placeholder during development).
