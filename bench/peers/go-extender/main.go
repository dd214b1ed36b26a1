// Command go-extender is the Go peer of raygate's benchmark: the kube-scheduler (and
// Volcano) extender a team would write with the standard library only — net/http,
// encoding/json, typed structs for the envelopes and the Pod and Node fields it reads.
//
// It applies raygate's rule to the same cluster snapshot (a kubectl List JSON file):
// a CPU-only Ray head, or a pending CPU-only Ray worker whose group has fewer scheduled
// pods than its floor, is refused on GPU nodes; CPU-only Ray pods score 10 on CPU nodes
// and 0 on GPU nodes; everything else is not managed. Replies are built to be identical
// to raygate's (the benchmark compares them before timing). Not implemented, because the
// benchmark payloads never need them: the thrash guard, the roles of bound pods, preempt
// and the gpuNodesForSurplus policy switch (the default, "surplus", is applied).
//
//	go-extender -snapshot cluster.json -addr 127.0.0.1:8889
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// raygate's defaults (policy/config.py).
var gpuResources = []string{
	"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu.intel.com/xe",
	"habana.ai/gaudi", "aws.amazon.com/neuron", "google.com/tpu",
}

var gpuNodeLabels = map[string]string{"nvidia.com/gpu.present": "true"}

const volcanoScoreScale = 50.0

// --- the Kubernetes fields read -------------------------------------------------------

type ObjectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	Labels            map[string]string `json:"labels"`
	DeletionTimestamp *string           `json:"deletionTimestamp"`
}

type Resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

type Container struct {
	Resources Resources `json:"resources"`
}

type Pod struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		NodeName       string      `json:"nodeName"`
		Containers     []Container `json:"containers"`
		InitContainers []Container `json:"initContainers"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

type Node struct {
	Metadata ObjectMeta `json:"metadata"`
	Status   struct {
		Allocatable map[string]string `json:"allocatable"`
	} `json:"status"`
}

type WorkerGroup struct {
	GroupName   string `json:"groupName"`
	Replicas    *int   `json:"replicas"`
	MinReplicas *int   `json:"minReplicas"`
	MaxReplicas *int   `json:"maxReplicas"`
	NumOfHosts  int    `json:"numOfHosts"`
	Suspend     bool   `json:"suspend"`
}

type RayCluster struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		EnableInTreeAutoscaling bool          `json:"enableInTreeAutoscaling"`
		Suspend                 bool          `json:"suspend"`
		WorkerGroupSpecs        []WorkerGroup `json:"workerGroupSpecs"`
	} `json:"spec"`
}

// --- kube-scheduler's extender envelope (k8s.io/kube-scheduler/extender/v1: no tags) ---

type NodeListIn struct {
	Items []json.RawMessage `json:"items"`
}

type ExtenderArgs struct {
	Pod       *Pod
	Nodes     *NodeListIn
	NodeNames *[]string
}

type NodeListOut struct {
	Metadata struct{}          `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

type ExtenderFilterResult struct {
	Nodes                      *NodeListOut
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

type HostPriority struct {
	Host  string
	Score int64
}

// --- Volcano's extender plugin (argument.go: tagged envelope, untagged api types) -----

type TaskInfo struct {
	NodeName string
	Pod      *Pod
}

type NodeInfo struct {
	Name string
	Node json.RawMessage
}

type PredicateRequest struct {
	Task *TaskInfo `json:"task"`
	Node *NodeInfo `json:"node"`
}

type PredicateResponse struct {
	ErrorMessage string `json:"status"`
	Code         int    `json:"code"`
}

type VolcanoPrioritizeRequest struct {
	Task  *TaskInfo  `json:"task"`
	Nodes []NodeInfo `json:"nodes"`
}

type VolcanoPrioritizeResponse struct {
	NodeScore    map[string]float64 `json:"nodeScore"`
	ErrorMessage string             `json:"errorMessage"`
}

// --- the cluster, read once at startup -----------------------------------------------

type groupKey struct{ namespace, cluster, group string }

type cluster struct {
	gpu         map[string]bool // node name -> GPU node?
	rayclusters map[[2]string]*RayCluster
	scheduled   map[groupKey]int
}

func positive(quantity string) bool {
	q := strings.TrimSpace(quantity)
	end := len(q)
	for end > 0 && (q[end-1] < '0' || q[end-1] > '9') && q[end-1] != '.' {
		end--
	}
	v, err := strconv.ParseFloat(q[:end], 64)
	return err == nil && v > 0
}

func isGPUNode(n *Node) bool {
	for _, r := range gpuResources {
		if q, ok := n.Status.Allocatable[r]; ok && positive(q) {
			return true
		}
	}
	for k, v := range gpuNodeLabels {
		if n.Metadata.Labels[k] == v {
			return true
		}
	}
	return false
}

func isRay(p *Pod) bool {
	t := p.Metadata.Labels["ray.io/node-type"]
	_, ok := p.Metadata.Labels["ray.io/cluster"]
	return ok && (t == "head" || t == "worker")
}

func keyOf(p *Pod) groupKey {
	return groupKey{p.Metadata.Namespace, p.Metadata.Labels["ray.io/cluster"], p.Metadata.Labels["ray.io/group"]}
}

func loadCluster(path string) (*cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, err
	}
	c := &cluster{map[string]bool{}, map[[2]string]*RayCluster{}, map[groupKey]int{}}
	for _, raw := range list.Items {
		var head struct{ Kind string }
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, err
		}
		switch head.Kind {
		case "Node":
			var n Node
			if err := json.Unmarshal(raw, &n); err != nil {
				return nil, err
			}
			c.gpu[n.Metadata.Name] = isGPUNode(&n)
		case "RayCluster":
			rc := &RayCluster{}
			if err := json.Unmarshal(raw, rc); err != nil {
				return nil, err
			}
			c.rayclusters[[2]string{rc.Metadata.Namespace, rc.Metadata.Name}] = rc
		case "Pod":
			var p Pod
			if err := json.Unmarshal(raw, &p); err != nil {
				return nil, err
			}
			live := p.Status.Phase != "Succeeded" && p.Status.Phase != "Failed" && p.Metadata.DeletionTimestamp == nil
			if isRay(&p) && p.Spec.NodeName != "" && live {
				c.scheduled[keyOf(&p)]++
			}
		}
	}
	return c, nil
}

// --- the rule ---------------------------------------------------------------------------

type decision struct {
	managed bool   // a CPU-only Ray pod: scored
	refuse  string // non-empty: GPU nodes refused with this message
}

func requestsGPU(p *Pod) bool {
	for _, cs := range [][]Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, r := range gpuResources {
				if positive(c.Resources.Requests[r]) || positive(c.Resources.Limits[r]) {
					return true
				}
			}
		}
	}
	return false
}

func groupFloor(rc *RayCluster, group string) int {
	for _, g := range rc.Spec.WorkerGroupSpecs {
		if g.GroupName != group {
			continue
		}
		if g.Suspend || rc.Spec.Suspend {
			return 0
		}
		hosts, lo, hi := max(g.NumOfHosts, 1), 0, math.MaxInt32
		if g.MinReplicas != nil {
			lo = *g.MinReplicas
		}
		if g.MaxReplicas != nil {
			hi = *g.MaxReplicas
		}
		if rc.Spec.EnableInTreeAutoscaling {
			return lo * hosts
		}
		replicas := lo
		if g.Replicas != nil {
			replicas = *g.Replicas
		}
		return min(max(replicas, lo), hi) * hosts
	}
	return 0
}

func (c *cluster) decide(p *Pod) decision {
	if !isRay(p) || requestsGPU(p) {
		return decision{}
	}
	const refused = "raygate: %s: GPU node refused to a CPU-only %s"
	if p.Metadata.Labels["ray.io/node-type"] == "head" {
		return decision{true, fmt.Sprintf(refused, "head-avoids-gpu",
			"Ray head; the head pod is always part of the gang floor")}
	}
	k := keyOf(p)
	rc := c.rayclusters[[2]string{k.namespace, k.cluster}]
	if rc == nil {
		return decision{true, fmt.Sprintf(refused, "floor-avoids-gpu", fmt.Sprintf(
			"floor worker; RayCluster %s/%s is unknown to raygate; treated as floor (the safe side)",
			k.namespace, k.cluster))}
	}
	floor, scheduled := groupFloor(rc, k.group), c.scheduled[k]
	if scheduled < floor {
		return decision{true, fmt.Sprintf(refused, "floor-avoids-gpu", fmt.Sprintf(
			"floor worker; group %s has %d of floor %d pods scheduled", k.group, scheduled, floor))}
	}
	return decision{managed: true}
}

func score(gpu bool) int64 {
	if gpu {
		return 0
	}
	return 10
}

// --- handlers -------------------------------------------------------------------------

type server struct{ cluster *cluster }

func reply(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		http.Error(w, fmt.Sprintf(`{"error":%q}`, err.Error()), http.StatusBadRequest)
		return false
	}
	return true
}

// nodesOf classifies the Node objects of a NodeList request (nodeCacheCapable: false).
func nodesOf(items []json.RawMessage) ([]string, []bool, error) {
	names, gpu := make([]string, len(items)), make([]bool, len(items))
	for i, raw := range items {
		var n Node
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, nil, err
		}
		names[i], gpu[i] = n.Metadata.Name, isGPUNode(&n)
	}
	return names, gpu, nil
}

func (s *server) filter(w http.ResponseWriter, r *http.Request) {
	var args ExtenderArgs
	if !decodeBody(w, r, &args) {
		return
	}
	result := ExtenderFilterResult{FailedNodes: map[string]string{}, FailedAndUnresolvableNodes: map[string]string{}}
	d := decision{}
	if args.Pod != nil {
		d = s.cluster.decide(args.Pod)
	}
	switch {
	case args.NodeNames != nil:
		passed := make([]string, 0, len(*args.NodeNames))
		for _, name := range *args.NodeNames {
			if d.refuse != "" && s.cluster.gpu[name] {
				result.FailedAndUnresolvableNodes[name] = d.refuse
			} else {
				passed = append(passed, name)
			}
		}
		result.NodeNames = &passed
	case args.Nodes != nil:
		kept := args.Nodes.Items
		if d.refuse != "" {
			names, gpu, err := nodesOf(args.Nodes.Items)
			if err != nil {
				result.Error = err.Error()
				reply(w, result)
				return
			}
			kept = make([]json.RawMessage, 0, len(names))
			for i, raw := range args.Nodes.Items {
				if gpu[i] {
					result.FailedAndUnresolvableNodes[names[i]] = d.refuse
				} else {
					kept = append(kept, raw)
				}
			}
		}
		if kept == nil {
			kept = []json.RawMessage{}
		}
		result.Nodes = &NodeListOut{Items: kept}
	default:
		empty := []string{}
		result.NodeNames = &empty
	}
	reply(w, result)
}

func (s *server) prioritize(w http.ResponseWriter, r *http.Request) {
	var args ExtenderArgs
	if !decodeBody(w, r, &args) {
		return
	}
	out := []HostPriority{}
	if args.Pod == nil || !s.cluster.decide(args.Pod).managed {
		reply(w, out)
		return
	}
	switch {
	case args.NodeNames != nil:
		for _, name := range *args.NodeNames {
			if gpu, known := s.cluster.gpu[name]; known {
				out = append(out, HostPriority{name, score(gpu)})
			}
		}
	case args.Nodes != nil:
		names, gpu, err := nodesOf(args.Nodes.Items)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for i, name := range names {
			out = append(out, HostPriority{name, score(gpu[i])})
		}
	}
	reply(w, out)
}

// emptyFilter passes every node it is given and decides nothing: the cost of the round
// trip alone (HTTP, and decoding the request's node names), for scheduler throughput runs.
func emptyFilter(w http.ResponseWriter, r *http.Request) {
	var args struct {
		NodeNames *[]string `json:"nodenames"`
	}
	if !decodeBody(w, r, &args) {
		return
	}
	names := []string{}
	if args.NodeNames != nil {
		names = *args.NodeNames
	}
	reply(w, ExtenderFilterResult{NodeNames: &names, FailedNodes: map[string]string{},
		FailedAndUnresolvableNodes: map[string]string{}})
}

// emptyPrioritize scores nothing (an empty HostPriorityList adds 0 to every node).
func emptyPrioritize(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	reply(w, []HostPriority{})
}

func healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "15")
	io.WriteString(w, `{"status":"ok"}`)
}

// volcanoGPU classifies a Volcano NodeInfo: by the snapshot when it knows the node, else
// by the Node object inside (absent: not a GPU node).
func (s *server) volcanoGPU(n *NodeInfo) (bool, error) {
	if gpu, known := s.cluster.gpu[n.Name]; known {
		return gpu, nil
	}
	if len(n.Node) == 0 || string(n.Node) == "null" {
		return false, nil
	}
	var node Node
	if err := json.Unmarshal(n.Node, &node); err != nil {
		return false, err
	}
	return isGPUNode(&node), nil
}

func (s *server) volcanoPredicate(w http.ResponseWriter, r *http.Request) {
	var req PredicateRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Task == nil || req.Task.Pod == nil || req.Node == nil {
		reply(w, PredicateResponse{"raygate-go: task, task.Pod and node are required", 1})
		return
	}
	d := s.cluster.decide(req.Task.Pod)
	if d.refuse == "" {
		reply(w, PredicateResponse{})
		return
	}
	gpu, err := s.volcanoGPU(req.Node)
	if err != nil {
		reply(w, PredicateResponse{err.Error(), 1})
		return
	}
	if !gpu {
		reply(w, PredicateResponse{})
		return
	}
	reply(w, PredicateResponse{d.refuse, 3}) // api.UnschedulableAndUnresolvable
}

func (s *server) volcanoPrioritize(w http.ResponseWriter, r *http.Request) {
	var req VolcanoPrioritizeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	out := VolcanoPrioritizeResponse{NodeScore: map[string]float64{}}
	if req.Task == nil || req.Task.Pod == nil || !s.cluster.decide(req.Task.Pod).managed {
		reply(w, out)
		return
	}
	for i := range req.Nodes {
		gpu, err := s.volcanoGPU(&req.Nodes[i])
		if err != nil {
			reply(w, VolcanoPrioritizeResponse{NodeScore: map[string]float64{}, ErrorMessage: err.Error()})
			return
		}
		out.NodeScore[req.Nodes[i].Name] = float64(score(gpu)) * volcanoScoreScale
	}
	reply(w, out)
}

func main() {
	snapshot := flag.String("snapshot", "", "cluster objects, a kubectl List JSON file")
	addr := flag.String("addr", "127.0.0.1:8889", "listen address")
	empty := flag.Bool("empty", false, "pass every node, score none, read no snapshot")
	flag.Parse()
	if *empty {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /scheduler/filter", emptyFilter)
		mux.HandleFunc("POST /scheduler/prioritize", emptyPrioritize)
		mux.HandleFunc("GET /healthz", healthz)
		log.Printf("go-extender: empty; listening on %s", *addr)
		log.Fatal(http.ListenAndServe(*addr, mux))
	}
	c, err := loadCluster(*snapshot)
	if err != nil {
		log.Fatalf("go-extender: %s: %v", *snapshot, err)
	}
	s := &server{c}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scheduler/filter", s.filter)
	mux.HandleFunc("POST /scheduler/prioritize", s.prioritize)
	mux.HandleFunc("POST /volcano/predicate", s.volcanoPredicate)
	mux.HandleFunc("POST /volcano/prioritize", s.volcanoPrioritize)
	mux.HandleFunc("GET /healthz", healthz)
	log.Printf("go-extender: %d nodes, %d RayClusters; listening on %s", len(c.gpu), len(c.rayclusters), *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
