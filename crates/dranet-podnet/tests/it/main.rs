//! dranet-podnet's integration tests, one binary: links moved into pods and given back in real
//! network namespaces, checked with iproute2 (`podnet`), crashes at every step and recovery,
//! children of a shared link (`child`), the health of links in pods (`health`), upstream
//! dranet's scenarios (`upstream_scenarios`), a link whose carrier is down (`linkdown`) and the
//! DHCP client against dnsmasq (`dhcp`), and SLAAC against dnsmasq's router advertisements
//! (`slaac`).
//! They need root and iproute2 (dnsmasq for DHCP); without them each prints a SKIP line and
//! passes. The crash tests re-run this binary with `--exact <module>::<test>`.

mod child;
mod dhcp;
mod health;
mod linkdown;
mod podnet;
mod slaac;
mod support;
mod upstream_scenarios;
