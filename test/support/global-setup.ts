import { generatePrismaClient } from './prisma-client';
import { probeServices } from './services';

export default async function globalSetup(): Promise<void> {
  generatePrismaClient();
  await probeServices();
}
