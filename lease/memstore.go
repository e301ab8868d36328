package lease

import "github.com/sluicehq/sluice/lease/memstore"

// The in-memory Store is package lease/memstore's; these names are its,
// kept here for the Manager (whose default Config.Local it is) and the
// callers that construct one beside it.
type (
	// MemoryStore is the in-memory Store (memstore.Store).
	MemoryStore = memstore.Store
	// MemoryStoreConfig configures a MemoryStore (memstore.Config).
	MemoryStoreConfig = memstore.Config
)

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore (memstore.New). Call Close
// to stop its janitor.
func NewMemoryStore(cfg MemoryStoreConfig) *MemoryStore { return memstore.New(cfg) }

// DefaultMemoryStoreConfig returns the MemoryStore's defaults
// (memstore.DefaultConfig).
func DefaultMemoryStoreConfig() MemoryStoreConfig { return memstore.DefaultConfig() }
