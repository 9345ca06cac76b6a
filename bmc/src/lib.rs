//! metal-bmc: Redfish and IPMI clients behind one Bmc trait (arrive with the bmc issue).
