#include "tianshu/agent/host.h"

#include <sstream>

#include "tianshu/agent/discovery.h"
#include "tianshu/base/units.h"

namespace tianshu::agent {

nlohmann::json HostToJson(const HostInfo& h) {
  using nlohmann::json;
  json j;
  j["hostname"] = h.hostname;
  j["kernel"] = h.kernel;
  j["cpu"] = {{"model", h.cpu_model}, {"sockets", h.sockets}, {"cores", h.cores}, {"cpus", h.cpus}};
  j["memory_bytes"] = h.memory_bytes;
  json numa = json::array();
  for (const auto& n : h.numa_nodes) {
    numa.push_back(
        {{"id", n.id}, {"cpus", FormatCpuList(n.cpus)}, {"memory_bytes", n.memory_bytes}});
  }
  j["numa_nodes"] = numa;
  json pci = json::array();
  for (const auto& d : h.pci) {
    pci.push_back({{"address", d.address},
                   {"vendor", d.vendor_id},
                   {"device", d.device_id},
                   {"class", d.class_id},
                   {"kind", d.kind},
                   {"numa", d.numa},
                   {"parent", d.parent_bridge}});
  }
  j["pci"] = pci;
  json nics = json::array();
  for (const auto& n : h.nics) {
    nics.push_back({{"name", n.name},
                    {"pci", n.pci_address},
                    {"speed_mbps", n.speed_mbps},
                    {"numa", n.numa},
                    {"mac", n.mac},
                    {"virtual", n.is_virtual}});
  }
  j["nics"] = nics;
  json rdma = json::array();
  for (const auto& r : h.rdma) {
    rdma.push_back({{"name", r.name},
                    {"pci", r.pci_address},
                    {"netdevs", r.netdevs},
                    {"ports", r.ports},
                    {"link_layer", r.link_layer},
                    {"rate_gbps", r.rate_gbps},
                    {"numa", r.numa}});
  }
  j["rdma"] = rdma;
  json blocks = json::array();
  for (const auto& b : h.block_devices) {
    blocks.push_back({{"name", b.name},
                      {"dev", b.dev},
                      {"size_bytes", b.size_bytes},
                      {"rotational", b.rotational},
                      {"nvme", b.nvme},
                      {"model", b.model},
                      {"pci", b.pci_address},
                      {"numa", b.numa}});
  }
  j["block_devices"] = blocks;
  json accs = json::array();
  for (const auto& a : h.accelerators) {
    json ja = {{"index", a.index},
               {"model", a.model},
               {"name", a.name},
               {"vendor", std::string(model::VendorName(a.vendor))},
               {"memory_bytes", a.memory_bytes},
               {"uuid", a.uuid},
               {"pci", a.pci_address},
               {"numa", a.numa},
               {"device_node", a.device_node},
               {"source", a.source},
               {"declared", a.declared}};
    if (a.mig_enabled) {
      ja["mig_enabled"] = *a.mig_enabled;
      json inst = json::array();
      for (const auto& m : a.mig_instances) {
        inst.push_back({{"uuid", m.uuid}, {"memory_bytes", m.memory_bytes}});
      }
      ja["mig_instances"] = inst;
    } else {
      ja["mig_enabled"] = nullptr;
    }
    accs.push_back(ja);
  }
  j["accelerators"] = accs;
  j["declared_accelerators"] = h.declared_accelerators;
  j["cgroup_mode"] = h.cgroup_mode;
  j["sources"] = h.sources;
  j["notes"] = h.notes;
  return j;
}

std::string HostToText(const HostInfo& h) {
  std::ostringstream o;
  o << "host " << h.hostname << " (kernel " << h.kernel << ")\n";
  o << "cpu: " << h.cpu_model << ", " << h.sockets << " socket(s), " << h.cores << " core(s), "
    << h.cpus << " CPU(s); memory " << FormatBytes(static_cast<double>(h.memory_bytes)) << "\n";
  for (const auto& n : h.numa_nodes) {
    o << "  numa " << n.id << ": cpus " << FormatCpuList(n.cpus) << ", "
      << FormatBytes(static_cast<double>(n.memory_bytes)) << "\n";
  }
  o << "accelerators" << (h.declared_accelerators ? " (declared, not found)" : "") << ": "
    << h.accelerators.size() << "\n";
  for (const auto& a : h.accelerators) {
    o << "  " << a.index << ": " << a.model << " "
      << FormatBytes(static_cast<double>(a.memory_bytes)) << " numa " << a.numa << " [" << a.source
      << "]";
    if (a.mig_enabled) o << " mig " << (*a.mig_enabled ? "on" : "off");
    o << "\n";
  }
  o << "nics: " << h.nics.size() << "\n";
  for (const auto& n : h.nics) {
    o << "  " << n.name << (n.is_virtual ? " (virtual)" : "") << " " << n.speed_mbps << " Mb/s"
      << (n.pci_address.empty() ? "" : " pci " + n.pci_address) << "\n";
  }
  o << "rdma: " << h.rdma.size() << "\n";
  for (const auto& r : h.rdma) {
    o << "  " << r.name << " " << r.link_layer << " " << r.rate_gbps << " Gb/s\n";
  }
  o << "block devices: " << h.block_devices.size() << "\n";
  for (const auto& b : h.block_devices) {
    o << "  " << b.name << " (" << b.dev << ") " << FormatBytes(static_cast<double>(b.size_bytes))
      << (b.nvme ? " nvme" : "") << (b.rotational ? " rotational" : "") << "\n";
  }
  o << "pci devices: " << h.pci.size() << "\n";
  o << "cgroups: " << h.cgroup_mode << "\n";
  for (const auto& n : h.notes) o << "note: " << n << "\n";
  return o.str();
}

}  // namespace tianshu::agent
